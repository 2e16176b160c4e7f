"""What every page shares, in Streamlit: the model picker, presenter mode, rooms, live lessons and the
stage. Streamlit is imported here and in kvviz/lessons (the lessons' state, views and rooms); the core
(kvviz's root modules, engine/, strategies/), cli/ and vllm/ never import it."""
