"""Where this comes from: what the lesson is (kvviz.lessons.lesson.Lesson), for kvviz.lessons.lecture. Its page
keeps no state."""

from kvviz.lessons.lesson import Lesson

LESSON = Lesson("sources", "Where this comes from", ":material/menu_book:",
                "The papers and code each lesson rests on, with links.", 2, prefix="sources_")
