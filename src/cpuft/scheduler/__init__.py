"""What the cluster's scheduler (Slurm, Kubernetes with Kubeflow Trainer) tells a process in its
environment: the job, its nodes, and this process's place in them (no torch)."""
