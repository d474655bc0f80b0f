"""What a training process needs around the loop: its place in the job and the process group
(dist, shm_collectives), stop requests (signals), hang detection (watchdog), the guard that
restarts a dead rank's start (restarts), and the checks made before any of it (preflight)."""
