"""Slurm variables recorded on a two-node Slurm 22.05 (../shared/notes/slurm.md): an
allocation of 2 nodes, 2 tasks and 2 CPUs a node, job 41."""

JOB = {"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODELIST": "n[1-2]",
       "SLURM_NNODES": "2", "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)",
       "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}
SALLOC_SHELL = dict(JOB)  # on the login node: no SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID
BATCH_SCRIPT = {**JOB, "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                "SLURM_CPUS_ON_NODE": "2", "SLURM_NTASKS_PER_NODE": "2"}
TASK_3 = {**JOB, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_PROCID": "3",
          "SLURM_NODEID": "1", "SLURM_LOCALID": "1", "SLURM_STEP_NUM_TASKS": "4",
          "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURMD_NODENAME": "n2"}
