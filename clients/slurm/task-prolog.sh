#!/bin/sh
# Slurm TaskProlog of gpusched (slurm.conf: TaskProlog=/usr/local/sbin/gpusched-task-prolog).
# slurmd runs it as the job's user before every task; its `export NAME=value` lines enter the
# task's environment. gpusched-slurm reads the job's recorded decision (squeue --json) and
# prints CUDA_VISIBLE_DEVICES and HAMi-core's limits. Set GPUSCHED_SLURM_BIN here if the binary
# is installed elsewhere.
exec "${GPUSCHED_SLURM_BIN:-/usr/local/bin/gpusched-slurm}" task-prolog
