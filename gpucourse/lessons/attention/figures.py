"""The attention lesson's charts: none yet. They come with the notebook (naive against FlashAttention bytes as n
grows, and both on lesson 00's roofline from ``model.placements``)."""

from __future__ import annotations
