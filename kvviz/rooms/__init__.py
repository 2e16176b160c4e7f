"""A room's data and where it is kept, without Streamlit: what a room is and the stores' interface
(types.py), this process's memory store and the choice of store (store.py), the Redis store that
several app processes share (redis_store.py) and the checks on what it reads back (codec.py).

kvviz.ui.rooms decides (codes, seats, sentences) and the lessons' room parts draw; both import from
here, and nothing here imports them, Streamlit, or a lesson: what a store must call back into the
pages (waking followers, writing a lesson's file) it is given."""
