"""``SagaFlow``: the class users subclass and list in ``AppConfig.saga_flows``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from bsft_saga.exceptions import FlowDefinitionError
from bsft_saga.flows.builder import SagaBuilderFactory
from bsft_saga.flows.definition import FlowDefinition


class SagaFlow:
    """A long-running process described by ``configure(factory)``.

    ``saga_type`` is stored on every instance and must stay stable across releases;
    it defaults to ``module.QualName``. Flows are built once, at app loading.

    ``version`` (a positive int, default 1) is stored on each new instance as
    ``SagaInstance.flow_version``; an instance keeps the steps and the state class of the
    version it started under until it completes. ``previous_versions`` lists the earlier
    definitions (classes or dotted paths) that instances still in flight run on: same
    ``saga_type``, a lower ``version``, and not listed in ``saga_flows`` themselves.
    """

    saga_type: ClassVar[str]
    version: ClassVar[int] = 1
    previous_versions: ClassVar[Sequence[type[SagaFlow] | str]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "saga_type" not in cls.__dict__:
            cls.saga_type = f"{cls.__module__}.{cls.__qualname__}"

    def configure(self, factory: SagaBuilderFactory) -> None:
        """Describe the flow: ``factory.with_state(S).start_with(E, key=...)...complete()``."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement configure(factory)")

    @classmethod
    def build_definition(cls) -> FlowDefinition:
        """Run ``configure`` against a fresh builder and return the checked definition."""
        flow_name = f"{cls.__module__}.{cls.__qualname__}"
        version = cls.version
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise FlowDefinitionError(
                f"flow {flow_name}: version must be a positive int, got {version!r}"
            )
        factory = SagaBuilderFactory(flow_name=flow_name, saga_type=cls.saga_type, version=version)
        cls().configure(factory)
        return factory.result()
