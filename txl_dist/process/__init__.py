"""What a training process needs around the loop: its place in the job and the process group
(dist.py, shm_collectives.py), stop requests (signals.py), hang detection (watchdog.py), the
guard that restarts a dead rank's start (restarts.py), the checks made before any of it
(preflight.py), its resident host memory (resident.py), glibc's allocator told to keep
what a step frees (allocator.py), and its compute threads on a shared machine (threads.py)."""
