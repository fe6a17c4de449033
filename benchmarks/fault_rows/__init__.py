"""The rows of the fault table (``benchmarks/faults.py``): one module per group of faults."""
