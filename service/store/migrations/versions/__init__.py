"""The state database's revisions, oldest first."""
