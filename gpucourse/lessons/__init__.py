"""The lessons, one package each. Notebooks and labs import a lesson as ``from gpucourse.lessons import <name>``.

Every package holds ``kernels`` (the kernels learners read), ``model`` (the hardware model and counted
quantities), ``experiments`` (host runners, microscope traces, GPU sweeps and their recording
registration) and ``figures`` (charts and widgets); its ``__init__`` re-exports the public names.

* ``measuring``   lesson 00, start here: measuring GPU code (asynchronous launches, ceilings)
* ``first_kernels`` lesson 00a, first kernels
* ``warps``       lesson 01, warps and SIMT
* ``divergence``  lesson 02, warp divergence
* ``coalescing``  lesson 03, memory coalescing
* ``tiling``      lesson 04, shared memory: tiling and bank conflicts
* ``reductions``  lesson 04a, reductions
* ``occupancy``   lesson 05, occupancy (``occupancy.calculator`` is the course's occupancy calculator)
* ``races``       lesson 06, races and the memory consistency model (``races.weakmemory``: the race
  scheduler and weak-memory model)
* ``precision``   lesson 07, mixed precision and tensor cores (``precision.formats``: exact number formats)
* ``feeding``     lesson 08, feeding the GPU (the capstone)

Nothing here is imported by the layers below (measure, viz, microscope, errors, hardware, validate):
tests/test_layers.py checks it.
"""
