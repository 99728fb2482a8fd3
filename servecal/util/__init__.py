"""What every stage shares and none owns: atomic writes and folder locks
(:mod:`.atomic`, :mod:`.folders`), the one-line user error (:mod:`.errors`), the
Arrow/numpy column helpers (:mod:`.arrow_numpy`) and a child process at a chosen
niceness (:mod:`.niceness`). Standard library and numpy only, so
any stage imports it without pulling in another."""
