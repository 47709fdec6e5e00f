"""Result maintenance: k-best lists kept in a subscription table's result pool."""
