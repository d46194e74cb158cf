"""``SagaFlow``: the class users subclass and list in ``AppConfig.saga_flows``."""

from __future__ import annotations

from typing import ClassVar

from bsft_saga.flows.builder import SagaBuilderFactory
from bsft_saga.flows.definition import FlowDefinition


class SagaFlow:
    """A long-running process described by ``configure(factory)``.

    ``saga_type`` is stored on every instance and must stay stable across releases;
    it defaults to ``module.QualName``. Flows are built once, at app loading.
    """

    saga_type: ClassVar[str]

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
        factory = SagaBuilderFactory(
            flow_name=f"{cls.__module__}.{cls.__qualname__}", saga_type=cls.saga_type
        )
        cls().configure(factory)
        return factory.result()
