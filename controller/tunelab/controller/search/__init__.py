"""Search under an SLO (issue 25): the space, strategies, the driver, the answer."""
