"""profiler: times transformer iterations on the local device and writes samples."""
