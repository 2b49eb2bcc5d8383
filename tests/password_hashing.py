"""Django's default password hasher, with each password hashed once per test session.

A hash is a million PBKDF2-SHA256 iterations: 0.7-0.9 s of CPU on a two-core machine, spent in
every test that creates a user with a password (a staff user of the schema fuzz's 70 operations,
the admin pages' operators…), though almost all of them log in with ``force_login``. This hasher
is Django's (same algorithm name, iterations and encoded form, so processes started by the tests
check its hashes with their own hasher), but its salt is drawn once per session and what it
encodes is kept: a password is hashed once, and checking it again costs nothing. Installed by the
session fixture ``_passwords_hashed_once`` of ``tests/conftest.py``.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class SessionSaltPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    _salt: str | None = None
    _encoded: dict[tuple[str | bytes, str, int], str] = {}

    def salt(self) -> str:
        if SessionSaltPBKDF2PasswordHasher._salt is None:
            SessionSaltPBKDF2PasswordHasher._salt = super().salt()
        return SessionSaltPBKDF2PasswordHasher._salt

    def encode(self, password, salt, iterations=None) -> str:
        key = (password, salt, iterations or self.iterations)
        if key not in self._encoded:
            self._encoded[key] = super().encode(*key)
        return self._encoded[key]
