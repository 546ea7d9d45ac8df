"""Serving the app: uvicorn's configuration (`server`) and the front door around its parser."""
