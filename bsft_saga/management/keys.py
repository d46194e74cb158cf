"""What a command says when a saga type and a key name no instance.

An operator types both at a prompt, so a miss is most often a typo in the saga type: then
the message lists the installed ones instead of only saying that the key has no instance.
"""

from __future__ import annotations

from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance

__all__ = ["nothing_found"]


def nothing_found(saga_type: str, key: str, *, active: bool = False) -> str:
    """The error for ``saga_type`` and ``key`` naming no (``active``) instance.

    A saga type that no installed flow declares and no instance has is unknown: the message
    lists the installed saga types. A flow removed from ``saga_flows`` leaves its instances,
    so its saga type still counts as known while any instance has it.
    """
    installed = sorted(definition.saga_type for definition in flow_registry.all())
    if saga_type in installed or SagaInstance.objects.filter(saga_type=saga_type).exists():
        which = "active instance" if active else "instance"
        return f"no {which} of {saga_type!r} has the key {key!r}"
    return (
        f"unknown saga type {saga_type!r}; installed saga types: {', '.join(installed) or 'none'}"
    )
