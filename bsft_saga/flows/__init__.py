"""Flow definitions: the builder, the immutable definitions and the registry."""

from bsft_saga.flows.base import SagaFlow
from bsft_saga.flows.builder import FlowBuilder, SagaBuilderFactory
from bsft_saga.flows.definition import EmptyState, FlowDefinition

__all__ = ["EmptyState", "FlowBuilder", "FlowDefinition", "SagaBuilderFactory", "SagaFlow"]
