"""The REST face: the FastAPI application, its routes, request and response models, and what every handler
shares.
"""
