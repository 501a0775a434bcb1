"""Custos evaluation harness: runs real workloads under schedulers and
collectors (in the sched_ext VM where needed) and reports loss and overhead
side by side, as ratios measured in one run, with tables and pictures.

Not for: generating workloads (that is `custos-workload`, in Rust) or
anything the `custos` binary does itself.
"""
