"""The time and cost of a fine-tuning job on K nodes, before renting them (``cpuft plan``): a
model of compute and communication, calibrated on what one node measured. Torch-free; named
apart from the speed-up plan (``cpuft.speedplan``), which chooses what one run does."""
