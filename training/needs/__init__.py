"""What a job really needs, from the hyperparameters it states: estimators trained on real measurements
(GPUMemNet for GPU memory and utilisation, Zeus and Gavel for epoch time per GPU type, Pollux for the
cost of spread), each beside an analytical baseline, with P50/P90 calibrated on held-out configurations."""
