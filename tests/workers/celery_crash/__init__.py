"""A test-only app that SIGKILLs a Celery worker inside one of bsft_saga's tasks, once.

Only the worker processes of tests/processes/test_celery_faults.py load it: they are started with
``DJANGO_SETTINGS_MODULE=tests.workers.celery_crash.settings``, which is ``tests.settings``
plus this app. The test process never installs it, so no other test can die of it.
"""
