"""Lesson 10's data-parallel variants on several processes, for an instructor's node (NCCL, one GPU per rank)
or any machine (gloo on the CPU):

    python tools/ddp_ranks.py --backend nccl --world 8 --time-steps 20
    python tools/ddp_ranks.py --backend gloo --world 2

Prints, per variant (per parameter, flat, overlap, buckets, ZeRO, toy FSDP), the collectives rank 0 called, the
bytes they carried, the check against one process on the whole batch and, with --time-steps, rank 0's median
step in ms (NCCL: GPU time of this node; gloo: CPU and loopback time, never a GPU's). Exit 0 when every variant
equals one process, 1 when one does not, 2 on bad arguments (one line).
"""

import sys

from gpucourse.lessons.dataparallel import experiments

if __name__ == "__main__":
    sys.exit(experiments.main(sys.argv[1:]))
