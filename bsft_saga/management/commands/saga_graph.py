"""``manage.py saga_graph``: draw registered flows as Mermaid, Graphviz or SVG diagrams."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bsft_saga.flows.graph import FORMATS, render
from bsft_saga.flows.registry import flow_registry


class Command(BaseCommand):
    help = (
        "Print the registered saga flows as a diagram: steps as states, transitions labelled "
        "with the awaited event classes, a final state for complete() flows and the "
        "with_deadline budget as a note; a flow with previous_versions is drawn once per "
        "version. Mermaid stateDiagram-v2 (default), Graphviz dot "
        "(`manage.py saga_graph --format dot | dot -Tsvg > sagas.svg`) or an SVG drawn "
        "without Graphviz (`--format svg > sagas.svg`), the picture of the admin's "
        "instance page."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "saga_type",
            nargs="?",
            metavar="SAGA_TYPE",
            help="Draw only this flow (its saga_type), every declared version of it; "
            "default: every registered flow.",
        )
        parser.add_argument(
            "--format",
            choices=FORMATS,
            default="mermaid",
            help="Output format (default: mermaid).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        known = sorted(d.saga_type for d in flow_registry.all())
        if not known:
            raise CommandError(
                "No saga flows are registered; list them in an AppConfig.saga_flows."
            )
        saga_type = options["saga_type"]
        if saga_type is None:
            drawn = known
        elif saga_type in known:
            drawn = [saga_type]
        else:
            raise CommandError(
                f"Unknown saga type {saga_type!r}. Known saga types: {', '.join(known)}"
            )
        definitions = [d for name in drawn for d in flow_registry.versions(name)]
        self.stdout.write(render(definitions, options["format"]))
