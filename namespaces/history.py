"""How much history the seed namespaces keep (``NamespaceSpec.history``).

Only the namespaces whose records are facts that change over time and that a
person may ask about later ("what did we know then", "when did this pattern
change") keep history; session state, signals, logs and gated data awaiting
consent keep none. The limits bound both the bytes a key's history takes
(each kept version is stored whole) and how long a superseded fact lingers:

- patterns (observed and learned): revised every few sessions, so 20 versions
  reach back months; 180 days, because a pattern older than half a year has
  been re-observed or is stale, and holding superseded personal observations
  longer is not worth their privacy cost.
- strategies: the same rhythm and reasoning as patterns (how well a strategy
  worked over time is what its history is for): 20 versions, 180 days.
- goals (north stars, priorities): change rarely and matter over years of
  review: 20 versions, 365 days.
- people: a relationship or role changes a few times at most: 10 versions,
  365 days.
- notes: edited in bursts (a note is rewritten several times in a sitting),
  so 10 versions, 90 days: enough to undo a bad edit, not an archive.
"""

from hrm_memory.core.spec import Keep

PATTERNS_HISTORY = Keep(versions=20, days=180)
STRATEGIES_HISTORY = Keep(versions=20, days=180)
GOALS_HISTORY = Keep(versions=20, days=365)
PEOPLE_HISTORY = Keep(versions=10, days=365)
NOTES_HISTORY = Keep(versions=10, days=90)
