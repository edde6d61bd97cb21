"""Traffic, scenarios and references shared by the pipeline's tests."""
