"""Retention as demotion (paper §6.1): score entities, archive the least valuable, restore."""
