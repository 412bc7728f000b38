"""Every API/store test starts from empty tables, so counts and listings mean what they say."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _empty_tables(clean_db: None) -> None:
    return None
