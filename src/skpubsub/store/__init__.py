"""Objects: the columnar object table and the index over alive objects used for refills."""
