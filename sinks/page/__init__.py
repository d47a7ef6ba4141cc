"""The live page: a job's health in a browser, served by `commwatch page` (see server.py)."""
