from tunelab.bench.simulator.app import main

raise SystemExit(main())
