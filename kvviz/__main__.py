from kvviz.cli.main import main

raise SystemExit(main())
