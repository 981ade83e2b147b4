"""Pure cores of the Liftbridge client: no I/O, no clock, no global randomness."""
