"""The sample project: bsft_saga wired into a small Django + Celery project.

Importing the package loads the Celery app, so that ``@shared_task`` tasks (bsft_saga's
among them) bind to it whenever Django starts -- the standard Django + Celery layout.
"""

from __future__ import annotations

from sample_project.celery import app as celery_app

__all__ = ["celery_app"]
