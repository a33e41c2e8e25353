"""The zoo benchmark's parts (benchmarks/zoo.py is its command line; benchmarks/zoo_gpu.py the GPU-bound zoo's).

- ``config``: :class:`~zoolib.config.ZooConfig`, the one configuration of a run (its networks, builders and jobs,
  the hook's settings), made once from the environment and the command line and handed down to every job;
- ``nets``: the networks (:data:`~zoolib.nets.NETS`) and the training step each job times;
- ``modes``: the context each mode's steps run in (PyTorch's default, prediction and verify mode, the pass-through
  control, benchmark mode paired);
- ``timing``: the clocks (wall, host and kernel time), the ABBA rotation of the modes' slots, CPU time by thread;
- ``jobs``: the jobs (paired, cold, benchmark, warm), a process each;
- ``drive``: the driver (a process per job, ``--resume``, ``--budget-s``) and the child that runs a job;
- ``pooling``: ratios pooled over slots and processes, with their bootstrap intervals, and the lines built on them;
- ``tables``: the results file's table.
"""
