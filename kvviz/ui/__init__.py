"""What every page shares, in Streamlit: the model picker, presenter mode, rooms, live lessons, the
stage, and a long click's progress bar with its Stop button (progress.py). Streamlit is imported here
and in kvviz/lessons (the lessons' state, views and rooms); the core (kvviz's root modules, engine/,
strategies/), rooms/ (a room's data and stores), cli/ and vllm/ never import it."""
