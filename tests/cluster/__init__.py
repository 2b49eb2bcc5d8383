"""Tests against clusters the tests start themselves on loopback (`make test-cluster`)."""
