"""Optimizers, gradient clipping and learning-rate schedulers.

>>> import tianyuan as ty
>>> opt = ty.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)
>>> sched = ty.optim.lr_scheduler.MultiStepLR(opt, milestones=[30, 60], gamma=0.1)
>>> loss.backward(); ty.optim.clip_grad_norm_(params, 5.0); opt.step(); opt.zero_grad()
>>> sched.step()   # once per epoch or once per iteration: the caller decides
"""
from . import lr_scheduler
from .adam import Adam, AdamW
from .clip import clip_grad_norm_, clip_grad_value_
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD
