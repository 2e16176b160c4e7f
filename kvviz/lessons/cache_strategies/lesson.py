"""Cache strategies: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture."""

from kvviz.lessons.cache_strategies import eviction_view, state
from kvviz.lessons.lesson import Lesson

LESSON = Lesson("cache_strategies", "Cache strategies", ":material/compare_arrows:",
                "Dynamic, static, sliding-window and quantized caches side by side: bytes, time and output.", 6,
                prefix="strategies_", parts=(state.KEYS, eviction_view.KEYS), files=state.FILES)
