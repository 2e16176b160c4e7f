"""A stepped lesson as one self-contained web page (`kvviz page`, and the lessons' *Download as a web page*).

build.py writes the page from a lesson file; facts.py says what each lesson's page shows around the stage;
record.py records a lesson at its page's defaults on a model, with no browser; page.html, page.css and page.js
are the page's markup, look and the script that steps the app's own stage (kvviz/ui/stage).
"""
