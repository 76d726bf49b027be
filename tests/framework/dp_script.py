"""Run by test_distributed.py, in one process or under mpiexec: a few SGD steps of a small
net (argv[2] "plain": no batch norm; "syncbn": SyncBatchNorm2d) where each process takes its
share of every batch and the gradients are averaged. Process 0 writes the final weights
(and running statistics) and each process's distance to them."""
import sys

import numpy as np

import tianyuan as ty
import tianyuan.functional as F
import tianyuan.nn as nn
from tianyuan import distributed as dist

rank, world = dist.rank(), dist.world_size()
ty.manual_seed(0)
if sys.argv[2] == "plain":
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
else:  # batch norm with the whole batch's statistics across the processes
    model = nn.convert_sync_batchnorm(nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)))
if rank:  # a different start everywhere but process 0: broadcast_state must undo it
    for p in model.parameters():
        p.data += 1.0
dist.broadcast_state(model)
opt = ty.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
rng = np.random.default_rng(1)
images = rng.standard_normal((4, 8, 3, 8, 8)).astype(np.float32)
labels = rng.integers(0, 5, (4, 8))
for step in range(4):
    x, y = images[step][rank::world], labels[step][rank::world]
    loss = F.cross_entropy(model(ty.tensor(x)), ty.tensor(y))
    opt.zero_grad()
    loss.backward()
    (mean_loss,) = dist.average_gradients(model.parameters(), [loss.item()])
    opt.step()
state = {k: np.array(v) for k, v in model.state_dict().items()}
gap = np.array([max(float(np.abs(v - dist.broadcast(v.copy())).max()) for v in state.values())])
dist.all_reduce(gap)   # 0 when every process holds process 0's weights
if dist.is_main():
    np.savez(sys.argv[1], world=world, loss=mean_loss, gap=gap, **state)
