from stagebench.cli import main

raise SystemExit(main())
