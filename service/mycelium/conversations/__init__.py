"""Conversations: the await loop, wake fan-out and message search over the timeline tables."""
