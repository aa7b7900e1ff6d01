"""Small C kernels that stock torch lacks, compiled on first use for the CPU they run on."""
