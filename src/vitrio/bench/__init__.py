"""The benchmark workloads and their baselines, run by `vitrio bench` and the scripts of benchmarks/.

W1-W4 of the core (`core`), epochs of `vitrio.data`'s DataLoader (`data`),
epochs through each kind of scratch (`scratch`) and how an epoch's cost
grows with the images and the files (`growth`), each against its baselines
in the same run. The baselines need the `bench` extra (mrcfile
and PyTorch).
"""
