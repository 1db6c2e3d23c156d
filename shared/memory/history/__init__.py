"""Time and portability: kept history and ``as_of`` reads (:mod:`.keeper`),
``forget`` (:mod:`.forget`), export and import (:mod:`.portable`)."""
