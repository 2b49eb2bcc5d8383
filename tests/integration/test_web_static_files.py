"""Production settings serve the collected, fingerprinted static files: ``chrono web`` refuses to
start before ``collectstatic`` ran, with what to run, instead of serving pages whose stylesheet
would fail."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from chronoadmin.management.commands.web import check_static_files_collected

MANIFEST_STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}


def test_web_refuses_to_start_before_collectstatic_and_starts_after(tmp_path):
    with override_settings(STORAGES=MANIFEST_STORAGES, STATIC_ROOT=tmp_path / "static",
                           WHITENOISE_USE_FINDERS=False):
        with pytest.raises(CommandError, match="chrono collectstatic --noinput"):
            check_static_files_collected()
        call_command("collectstatic", "--noinput", verbosity=0)
        check_static_files_collected()
        assert (tmp_path / "static" / "staticfiles.json").exists()


def test_development_settings_need_no_collectstatic():
    check_static_files_collected()
