"""Configuration templates for the servers that ``localservices`` starts.

Each ``*.conf`` file is a :class:`string.Template`; ``services.py`` fills in paths and ports and
writes the result into the service's data directory on every ``chrono services up``, so the copy
in the data directory is generated and edits belong here.
"""
