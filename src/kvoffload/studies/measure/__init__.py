"""Measure this machine (host memory, storage, and the GPU when PyTorch with CUDA is present)
and write a hardware profile whose measured figures say how and when they were taken.

Modules by job: ``plan`` (what to measure, the report, the figure helpers), ``host_rates``,
``storage_rates`` and ``gpu_rates`` (each part), ``machine`` (the whole run), ``profile_file``
(the profile, checked and written) and ``summary`` (the terminal lines, the nearest system).
"""

from kvoffload.studies.measure.gpu_rates import gpu
from kvoffload.studies.measure.host_rates import host_memory
from kvoffload.studies.measure.machine import run, run_plan
from kvoffload.studies.measure.plan import Plan, Report, plain_note
from kvoffload.studies.measure.profile_file import PROFILE_MODE, check_out, profile, write_profile
from kvoffload.studies.measure.storage_rates import SCRATCH_PREFIX, storage
from kvoffload.studies.measure.summary import nearest_system, random_read_rows, summarise

__all__ = [
    "PROFILE_MODE",
    "SCRATCH_PREFIX",
    "Plan",
    "Report",
    "check_out",
    "gpu",
    "host_memory",
    "nearest_system",
    "plain_note",
    "profile",
    "random_read_rows",
    "run",
    "run_plan",
    "storage",
    "summarise",
    "write_profile",
]
