"""The benchmark workloads and their baselines, run by `vitrio bench` and the scripts of benchmarks/.

W1-W4 of the core (`core`), epochs of `vitrio.data`'s DataLoader (`data`)
and epochs through each kind of scratch (`scratch`), each against its
baselines in the same run. The baselines need the `bench` extra (mrcfile
and PyTorch).
"""
