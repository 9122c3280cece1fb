"""Run by torchrun from test_distributed.py: each process reads its shard of every batch of an epoch.

    python -m torch.distributed.run --standalone --nproc_per_node=2 distributed_torch.py STACK ROWS BATCH SEED

Image i of STACK holds the value i everywhere. Every process checks the
images it read against their rows; the rows are gathered, and rank 0 checks
that every row was read, the first ones of the epoch's order again as
padding, and prints them.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

import vitrio as vio
from vitrio.data import BatchSampler, DataLoader, Dataset, ImageSource


def main() -> int:
    stack, rows, batch_size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = Dataset({"image": ImageSource([vio.ImageLocation(stack, i) for i in range(rows)])})
    sampler = BatchSampler(len(dataset), batch_size, shuffle=True, seed=seed, shard=(rank, world))
    read = []
    for batch in DataLoader(dataset, batch_sampler=sampler, output="torch", loader=vio.loader(workers=1)):
        assert torch.equal(batch["image"][:, 0, 0], batch["index"].to(torch.float32)), batch["index"]
        read.append(batch["index"])
    mine = torch.cat(read)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    failed = 0
    if rank == 0:
        everything = sorted(torch.cat(gathered).tolist())
        order = BatchSampler(rows, batch_size, shuffle=True, seed=seed).order(0).tolist()
        padding = -(-rows // world) * world - rows
        print("rows read:", everything, flush=True)
        failed = int(everything != sorted(order + order[:padding]) or set(everything) != set(range(rows)))
    dist.destroy_process_group()
    return failed


if __name__ == "__main__":
    sys.exit(main())
