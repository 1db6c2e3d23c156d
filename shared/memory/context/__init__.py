"""Context: an HRM's memory rendered for a prompt within a token budget
(``render`` reads the store, ``fill`` packs the budget). A feature on top of
recall and the core."""
