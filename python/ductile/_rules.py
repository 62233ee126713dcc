"""The update rules the servers run for torch optimizers: a param group's
optimizer kind and hyper-parameters as table options."""

from typing import Any, Dict

import torch

import ductile

SUPPORTED = (
    "SGD (momentum, weight_decay; no dampening, no nesterov), "
    "Adagrad (weight_decay; no lr_decay, initial_accumulator_value 0), "
    "Adam (weight_decay; no amsgrad), AdamW with weight_decay=0"
)


def base_rate(group: Dict[str, Any]) -> float:
    """The rate a param group's tensor is made with: the one its LR
    scheduler started from (`initial_lr`, which torch's schedulers set), else
    its current one. The pushes carry the current rate's ratio to it."""
    lr = float(group.get("initial_lr", group["lr"]))
    if not lr > 0:
        raise ductile.InvalidArgument(f"the learning rate must be positive, not {lr}")
    return lr


def unsupported(optimizer: torch.optim.Optimizer, why: str) -> ductile.InvalidArgument:
    return ductile.InvalidArgument(
        f"{type(optimizer).__name__}{why} has no update rule on the servers; "
        f"they run {SUPPORTED}. Pass average_gradients=True to have the servers "
        "average each clock's gradients and run the optimizer on each worker (BSP)"
    )


def server_rule(optimizer: torch.optim.Optimizer, group: Dict[str, Any]) -> Dict[str, Any]:
    """The table options of one param group's update rule, at its base
    rate (base_rate)."""
    kind = type(optimizer)
    lr = base_rate(group)
    if group.get("maximize", False):
        raise unsupported(optimizer, " with maximize=True")
    if kind is torch.optim.SGD:
        if group["dampening"] != 0 or group["nesterov"]:
            raise unsupported(optimizer, " with dampening or nesterov")
        if group["momentum"] == 0:
            return {"rule": "sgd", "learning_rate": lr}
        return {"rule": "momentum", "learning_rate": lr, "momentum": float(group["momentum"])}
    if kind is torch.optim.Adagrad:
        if group["lr_decay"] != 0 or group["initial_accumulator_value"] != 0:
            raise unsupported(optimizer, " with lr_decay or initial_accumulator_value")
        return {"rule": "adagrad", "learning_rate": lr, "epsilon": float(group["eps"])}
    if kind is torch.optim.Adam or (kind is torch.optim.AdamW and group["weight_decay"] == 0):
        if group["amsgrad"]:
            raise unsupported(optimizer, " with amsgrad")
        beta1, beta2 = group["betas"]
        return {
            "rule": "adam",
            "learning_rate": lr,
            "beta1": float(beta1),
            "beta2": float(beta2),
            "epsilon": float(group["eps"]),
        }
    if kind is torch.optim.AdamW:
        raise unsupported(optimizer, " with weight_decay (decoupled)")
    raise unsupported(optimizer, "")
