"""Date formats of Chrono's pages: ISO-like, to the second (Django's English default, "Dec. 1,
2026, 10:05 a.m.", stops at the minute, too coarse for a job that fires every 5 s). Timings
that matter to the millisecond are shown with their own formatter (``scheduler.admin.with_ms``)."""

DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
