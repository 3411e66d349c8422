"""The launcher's profiler and the node's GPUs: the sampling rounds (sampling.py) around the pure step
(samplestep.py) and the engine's counters (enginestats.py); the GPUs the node offers (gpus.py), found and
read through NVML (nvml.py, behind gpureader.py)."""
