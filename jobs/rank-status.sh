#!/bin/sh
# Runs one rank's command; when it fails, says which rank on which node failed, so that
# the job's error sentinel can name them (commbench.jobs.joblog reads this line). Launchers
# run it through a profile's [launch.mpirun] wrapper.
"$@"
rc=$?
if [ "$rc" -ne 0 ]; then
    echo "commbench rank ${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-?}} on $(hostname): exit status $rc" >&2
fi
exit "$rc"
