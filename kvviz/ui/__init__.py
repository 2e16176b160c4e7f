"""Small Streamlit helpers shared by the pages (the only streamlit import inside kvviz)."""
